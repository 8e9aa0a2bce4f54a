"""``python -m verlog.evaluation AGENT --suite ...`` (the same as ``verlog eval``)."""

import sys

from verlog.evaluation.command import main

sys.exit(main())
