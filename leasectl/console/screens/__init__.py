"""The console screens: main, detail, confirmation, filter and help."""
