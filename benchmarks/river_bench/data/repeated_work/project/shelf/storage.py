"""Reading and writing the library's records as JSON files."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

from shelf.models import Book, Member


def load_books(path: Path) -> list[Book]:
    """The books stored in the JSON file at `path`."""
    with open(path, encoding="utf-8") as f:
        rows = json.load(f)
    return [Book(**row) for row in rows]


def save_books(path: Path, books: list[Book]) -> None:
    """Write `books` to the JSON file at `path`."""
    rows = [{"isbn": b.isbn, "title": b.title, "author": b.author, "year": b.year, "copies": b.copies} for b in books]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=2)


def load_members(path: Path) -> list[Member]:
    """The members stored in the JSON file at `path`."""
    with open(path, encoding="utf-8") as f:
        rows = json.load(f)
    return [
        Member(
            member_id=row["member_id"], name=row["name"], email=row["email"], joined=date.fromisoformat(row["joined"])
        )
        for row in rows
    ]


def save_members(path: Path, members: list[Member]) -> None:
    """Write `members` to the JSON file at `path`."""
    rows = [
        {"member_id": m.member_id, "name": m.name, "email": m.email, "joined": m.joined.isoformat()} for m in members
    ]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=2)
