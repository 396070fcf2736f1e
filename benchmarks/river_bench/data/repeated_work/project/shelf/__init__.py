"""shelf: a small library's books, members and loans."""
