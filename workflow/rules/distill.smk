# Progressive distillation rounds (spec §7): teacher + previous student → student checkpoint.
