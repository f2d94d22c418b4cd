"""Run configs: the validated run, model specs, HuggingFace config.json files, the device catalog."""
