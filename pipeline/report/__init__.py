"""Rendering for people: Markdown medical-record pages (and later HTML). No analysis here."""
