"""verlog's benchmarks, grouped by kind; each script runs from the repository root as a module.

    python -m benchmarks.speed.<name>     # how fast: envs, GAE, rollout, update, replay, the GPU check
    python -m benchmarks.probes.<name>    # what a model or a method does: prompts, first moves, compare, sweep,
                                          # long-run health
    python -m benchmarks.demos.<name>     # the learning demonstrations and their ablation, judged by rule

:mod:`benchmarks.common` holds what more than one script needs; figures go to ``benchmarks/results/``;
``noxfile.py`` runs each as a session.
"""
