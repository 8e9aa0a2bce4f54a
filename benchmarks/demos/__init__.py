"""The learning demonstrations: a preset trained and judged by rule (three standard errors), and the ablation of
the Crafter one."""
