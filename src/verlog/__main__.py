"""``python -m verlog``: the ``verlog`` console script, for a child process that must use this interpreter."""

from verlog.cli import main

raise SystemExit(main())
