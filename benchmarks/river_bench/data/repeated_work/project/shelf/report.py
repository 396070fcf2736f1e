"""Plain-text reports for the front desk."""

from __future__ import annotations

from datetime import date

from shelf.loans import available
from shelf.models import Book, Loan, Member


def books_report(books: list[Book], loans: list[Loan]) -> str:
    """One line per book: title, author, year and copies on the shelf."""
    lines = ["Title | Author | Year | On shelf"]
    for book in sorted(books, key=lambda b: b.title):
        lines.append(f"{book.title} | {book.author} | {book.year} | {available(book, loans)}/{book.copies}")
    return "\n".join(lines)


def overdue_report(late: list[Loan], members: list[Member], today: date) -> str:
    """One line per overdue loan: who has which book, and for how many days too long."""
    names = {m.member_id: m.name for m in members}
    lines = ["Member | ISBN | Days overdue"]
    for loan in late:
        lines.append(f"{names.get(loan.member_id, '?')} | {loan.isbn} | {(today - loan.due).days}")
    return "\n".join(lines)
