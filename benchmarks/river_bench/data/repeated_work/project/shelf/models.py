"""The records a library keeps."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Optional


@dataclass
class Book:
    isbn: str
    title: str
    author: str
    year: int
    copies: int = 1


@dataclass
class Member:
    member_id: int
    name: str
    email: str
    joined: date = field(default_factory=date.today)


@dataclass
class Loan:
    isbn: str
    member_id: int
    borrowed: date
    due: date
    returned: Optional[date] = None

    @property
    def is_open(self) -> bool:
        return self.returned is None
