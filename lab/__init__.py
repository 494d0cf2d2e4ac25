"""The maintainers' lab: what runs arbibench for days on this repository's machine, kept out of the package.

``pyproject.toml`` installs ``arbibench*`` only, so ``pip install arbibench`` ships no job runner that commits to a
user's repository. The lab drives arbibench through its command line alone (``arbibench ...`` as child processes,
``arbibench protocol progress --json`` for a run's counts) and imports nothing of it but the bottom row of
``docs/architecture.md`` (atomic files, the console, the active clock). Run it from the repository root:
``python -m lab queue ...`` (docs/long-jobs.md).
"""
