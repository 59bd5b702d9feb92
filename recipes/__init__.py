"""Training recipes: data-parallel (pmap) training of the zoo's models on TFDS data."""
