"""``python -m verlog.report RUN``."""

from verlog.report.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
