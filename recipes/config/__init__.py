"""The run's config: its fields (one declaration each: default, rule, help),
the defaults built from them, validation, and the command-line handling."""
