"""Training recipes for the zoo's models: the command line, the loop and the
shared step at the top; data/, parallel/ (strategies) and bench/ by concern."""
