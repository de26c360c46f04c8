"""Plotly figures, self-contained HTML reports, the live page, alert rules, Grafana."""
