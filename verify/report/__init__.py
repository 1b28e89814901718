"""The report: its assembly into report.json, and its rendering."""
