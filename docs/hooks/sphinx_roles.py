"""verlog's docstrings cross-reference with Sphinx roles (``:class:`TextEnv```); on the API pages the role's
name would show as text before the code, so it is dropped from the rendered HTML (the code stays)."""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:py:)?(?:attr|meth|class|func|mod|data|exc|obj|const):(?=<code)")


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    return ROLE.sub("", html)
