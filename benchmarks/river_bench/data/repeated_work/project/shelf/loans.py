"""Lending books to members."""

from __future__ import annotations

from datetime import date, timedelta

from shelf.models import Book, Loan, Member

LOAN_DAYS = 21


def available(book: Book, loans: list[Loan]) -> int:
    """Copies of `book` on the shelf now."""
    out = sum(1 for loan in loans if loan.isbn == book.isbn and loan.is_open)
    return book.copies - out


def borrow(book: Book, member: Member, loans: list[Loan], today: date) -> Loan:
    """Lend a copy of `book` to `member`; ValueError if none is on the shelf."""
    if available(book, loans) <= 0:
        raise ValueError(f"no copy of {book.title!r} is available")
    loan = Loan(isbn=book.isbn, member_id=member.member_id, borrowed=today, due=today + timedelta(days=LOAN_DAYS))
    loans.append(loan)
    return loan


def give_back(loan: Loan, today: date) -> None:
    """Record that the loan's book came back."""
    if not loan.is_open:
        raise ValueError("this loan is closed already")
    loan.returned = today


def overdue(loans: list[Loan], today: date) -> list[Loan]:
    """The open loans past their due date, the longest overdue first."""
    late = [loan for loan in loans if loan.is_open and loan.due < today]
    return sorted(late, key=lambda loan: loan.due)
