"""shelf.storage: records survive a round trip through their JSON files."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest
from shelf.models import Book, Member
from shelf.storage import load_books, load_members, save_books, save_members


@pytest.fixture
def books() -> list[Book]:
    return [
        Book(isbn="978-0-14-044913-6", title="Crime and Punishment", author="Fyodor Dostoevsky", year=1866),
        Book(isbn="978-0-452-28423-4", title="Nineteen Eighty-Four", author="George Orwell", year=1949, copies=3),
    ]


@pytest.fixture
def members() -> list[Member]:
    return [
        Member(member_id=1, name="Ada Byron", email="ada@example.org", joined=date(2023, 1, 15)),
        Member(member_id=2, name="Alan Turing", email="alan@example.org", joined=date(2024, 6, 23)),
    ]


def test_books_round_trip(tmp_path: Path, books: list[Book]) -> None:
    path = tmp_path / "books.json"
    save_books(path, books)
    assert load_books(path) == books


def test_members_round_trip(tmp_path: Path, members: list[Member]) -> None:
    path = tmp_path / "members.json"
    save_members(path, members)
    assert load_members(path) == members


def test_a_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_books(tmp_path / "missing.json")
