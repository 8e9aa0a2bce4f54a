"""Evaluate a model, a training run or a baseline on a suite: BALROG scores with standard errors.

    python agents/evaluate.py random --suite babyai --episodes 10
    python agents/evaluate.py oracle --suite babaisai
    python agents/evaluate.py runs/learn-0001 --suite verlog/BabyAI-GoTo-v0 --episodes 50
    python agents/evaluate.py Qwen/Qwen2.5-3B-Instruct --suite babyai --config envs/babyai.toml

The same as ``verlog eval``; ``--help`` lists every option. Rerunning a command resumes its output folder.
"""

from __future__ import annotations

import sys

from verlog.evaluation.command import main

if __name__ == "__main__":
    sys.exit(main())
