"""The report: its assembly into report.json (assemble.py), its one reader (reader.py), and its rendering."""
