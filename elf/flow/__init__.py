"""Flow-matching maths: paths and velocities, the training objective, samplers. No I/O."""
