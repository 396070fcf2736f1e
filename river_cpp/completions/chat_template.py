"""A GGUF's own chat template rendered by Jinja2, as Hugging Face and
llama-cpp-python render it.

llama.cpp's built-in renderer (Tokenizer.apply_chat_template) recognises a template
and re-implements it: it knows no `tools`, no tool messages and no assistant
`tool_calls`, and it leaves out a template's default system prompt (Qwen2.5's,
SmolLM2's). Rendering the template itself gives the model the prompt it was trained
on, tools included, and the very prompt llama-cpp-python's Llama builds.
"""

from __future__ import annotations

import json
import weakref
from datetime import datetime
from typing import Any, Mapping, Optional, Sequence

import jinja2
import jinja2.ext
import llama_cpp
from jinja2.sandbox import ImmutableSandboxedEnvironment


def _tojson(value: Any, ensure_ascii: bool = False, indent: Optional[int] = None, **kwargs: Any) -> str:
    # Hugging Face's tojson: no HTML escaping, non-ASCII kept (Jinja's own escapes both)
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, **kwargs)


def _raise(message: str) -> None:
    raise ValueError(f"the chat template refused the messages: {message}")


class _Generation(jinja2.ext.Extension):
    """Hugging Face's {% generation %} ... {% endgeneration %} marks: rendered as their body."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> Any:
        parser.stream.skip(1)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class ChatTemplate:
    """The Jinja2 chat template of one tokenizer (its GGUF's tokenizer.chat_template)."""

    def __init__(self, tokenizer, source: Optional[str] = None) -> None:
        """The template of `tokenizer`'s GGUF, or `source` (another Jinja2 chat
        template, e.g. a chat_format's), with the tokenizer's BOS and EOS."""
        source = tokenizer.chat_template if source is None else source
        if not source:
            raise ValueError("this model has no chat template (tokenizer.chat_template)")
        self.source = source
        environment = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols]
        )
        environment.filters["tojson"] = _tojson
        try:
            self._template = environment.from_string(source)
        except jinja2.TemplateError as error:
            raise ValueError(f"the model's chat template is not valid Jinja2: {error}") from None
        self._bos = _token_text(tokenizer, tokenizer.bos_id)
        self._eos = _token_text(tokenizer, tokenizer.eos_id)

    @property
    def supports_tools(self) -> bool:
        """Whether the template renders a `tools` list (Qwen2.5's, Llama 3.1's do)."""
        return "tools" in self.source

    def render(
        self, messages: Sequence[Mapping[str, Any]], *, tools: Optional[Sequence[Mapping[str, Any]]] = None
    ) -> str:
        """The prompt of `messages` (and `tools`), ending where the assistant's turn begins."""
        if tools and not self.supports_tools:
            raise ValueError("this model's chat template has no tool support: it does not render `tools`")
        try:
            return self._template.render(
                messages=list(messages),
                tools=list(tools) if tools else None,
                add_generation_prompt=True,
                bos_token=self._bos,
                eos_token=self._eos,
                raise_exception=_raise,
                strftime_now=lambda fmt: datetime.now().strftime(fmt),
            )
        except jinja2.TemplateError as error:
            raise ValueError(f"the chat template failed on these messages: {error}") from None


def _token_text(tokenizer, token: int) -> str:
    if token < 0:
        return ""
    return llama_cpp.llama_vocab_get_text(tokenizer.vocab, token).decode("utf-8", errors="replace")


_templates: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def chat_template(tokenizer) -> ChatTemplate:
    """The ChatTemplate of `tokenizer`, compiled once."""
    template = _templates.get(tokenizer)
    if template is None:
        template = _templates[tokenizer] = ChatTemplate(tokenizer)
    return template
