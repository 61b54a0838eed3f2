"""nanogrpo: GRPO for reasoning LLMs in plain PyTorch."""


class ConfigError(ValueError):
    """Bad input named before any compute (train.py exits 2 with it): a config key or value, or a name in the config
    that does not resolve (a task, a reward, a user's file). Defined here, not in config.py, so that what the config
    names (nanogrpo/tasks, rewards, usercode) can raise it while config.py imports them to check the names."""
