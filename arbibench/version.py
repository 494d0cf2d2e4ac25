"""arbibench's version, in a module of its own so that the leaderboard can print it without loading torch."""

__version__ = "0.1.0"
