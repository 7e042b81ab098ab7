"""What watches a production endpoint, apart from how a model reaches it (:mod:`mlrunway.deploy`,
its stable endpoint): the drift of what its deployments collected from a reference, per signal
(:mod:`drift`, Azure ML's metrics), and the monitor that reads the collected rows and reports (:mod:`monitor`). No
Airflow here: the monitor_endpoint DAG's task drives it."""

__all__ = ["drift", "monitor"]
