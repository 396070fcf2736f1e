"""The llama-cpp-python drop-in: `Llama` (llama.py: construction, vocabulary, embeddings),
its completions (completions.py), eval / sample / generate (low_level.py), the members
frameworks read (members.py), and compat.py: the keyword tables and what is refused.
"""
