"""Where examples come from: IDX files, TFDS, image folders, Hugging Face
datasets, prepared ArrayRecord files; the encoded-example interface and
split names they share."""
