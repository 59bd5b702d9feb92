"""Where examples come from: IDX files, TFDS, image folders, Hugging Face
datasets, prepared ArrayRecord files, and text (JSONL, parquet, Hugging
Face text columns); the encoded-example and text interfaces and split names
they share."""
