"""The HTML report of one or more run directories: figures, tables, template."""
