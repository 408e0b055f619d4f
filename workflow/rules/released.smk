# Released checkpoints as runs: the authors' weights instead of a training rule.
