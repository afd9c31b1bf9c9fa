"""The console: the web page under `/ui/` on every node (`pages`) and its files (`ui/`).

May import: `sparkiq.http.messages`; only the app imports it.
"""
