"""The plan rendered for a person: a chart and a markdown summary."""
