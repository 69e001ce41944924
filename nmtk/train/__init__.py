"""Training: loss, learning-rate schedule, checkpoints, the trainer loop, distributed setup."""
