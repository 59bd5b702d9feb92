"""Text as tokens: a model's own tokenizer, and documents packed into
sequences of a fixed length."""
