"""Small gguf-py helpers shared by the fixtures that write GGUF files."""

from __future__ import annotations

from typing import Iterable

import gguf


def add_fields(writer: gguf.GGUFWriter, fields: Iterable[gguf.ReaderField]) -> None:
    """Copy metadata fields read by GGUFReader into `writer`, keeping their types."""
    for field in fields:
        value_type = field.types[0]
        sub_type = field.types[-1] if value_type == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), value_type, sub_type=sub_type)


def write_and_close(writer: gguf.GGUFWriter) -> None:
    """Header, metadata and tensors, in the order GGUF lays them out."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
