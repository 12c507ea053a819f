"""The console widgets: panel tables and the bars around them."""
