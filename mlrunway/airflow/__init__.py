"""The Airflow adapter: the hook that turns a connection into a backend. The only package that imports Airflow."""
