"""A run's machinery: everything a training run needs that is not the learning algorithm (floor 3).

- ``folder``: the run folder described once (file names, checkpoint names, finding runs and checkpoints,
  rewinding a resumed run's rows); no torch, so the report and evaluation read run folders through it;
- ``checkpoint`` and ``manifest``: atomic checkpoints with sha256 manifests, JSON and safetensors only;
- ``samples``: the sampled-turn file; ``logger``: metrics.jsonl, trackers and the per-update console table;
- ``launch``: the ``verlog launch`` command and what each launched process checks;
- ``distributed``: process setup and collectives; ``faults``: diverged runs and skipped updates;
- ``watchdog``: the collapse watchdog (a run's health, judged from its metrics) and where it rolls back to;
- ``curriculum``: stages of env difficulty, advanced on recent success (the trainer rebuilds its envs);
- ``validate``: every check of a :class:`verlog.config.Config` before a run starts.

It never imports :mod:`verlog.ppo` (the learner, a floor above); the learner, ``verlog eval`` and
``verlog report`` all use it. The quiet console (third-party output to the run's log) is :mod:`verlog.quiet`,
a floor below, since model loading and samplers use it too.
"""
