"""The command line: shelf books, shelf borrow ISBN MEMBER."""

from __future__ import annotations

import argparse
from datetime import date
from pathlib import Path

from shelf import loans as lending
from shelf.report import books_report
from shelf.storage import load_books, load_members


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shelf")
    parser.add_argument("--data", type=Path, default=Path("data"), help="the folder of the JSON files")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("books", help="list the books")
    borrow = commands.add_parser("borrow", help="lend a book")
    borrow.add_argument("isbn")
    borrow.add_argument("member_id", type=int)
    args = parser.parse_args(argv)

    books = load_books(args.data / "books.json")
    members = load_members(args.data / "members.json")
    loans: list = []
    if args.command == "books":
        print(books_report(books, loans))
    elif args.command == "borrow":
        book = next(b for b in books if b.isbn == args.isbn)
        member = next(m for m in members if m.member_id == args.member_id)
        loan = lending.borrow(book, member, loans, date.today())
        print(f"{member.name} borrowed {book.title}, due {loan.due.isoformat()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
