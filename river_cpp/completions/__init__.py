"""OpenAI-shaped completions on a model, in llama-cpp-python's API shape: the floor
between the model facade (which offers them) and decoding.

- text: create_completion; chat: create_chat_completion, chat_prompt;
- shared: one generation of a request, usage, n choices, CANCELLED;
- output_text: the text and stream chunks llama-cpp-python gives for a token's bytes;
- chat_template: the GGUF's chat template (llama.cpp's renderer or Jinja2);
- structured: response_format as a grammar; tools: tool calls (prompt, grammar, parsing).

HTTP, its validation and SSE framing are river_cpp.apps.server's.
"""

from river_cpp.completions.chat import chat_prompt, create_chat_completion
from river_cpp.completions.shared import CANCELLED, Cancel
from river_cpp.completions.text import create_completion

__all__ = ["CANCELLED", "Cancel", "chat_prompt", "create_chat_completion", "create_completion"]
