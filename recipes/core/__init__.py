"""The math every strategy shares: the train and eval step, the train state
and what it is built from, optimizers and schedules, metrics, mixup/cutmix."""
