"""What the tests that run Airflow's own services share: a fresh PostgreSQL database and a Redis database."""

from __future__ import annotations

import os

import pytest

from tests.e2e.stack import PG

REDIS_DB = 7  # the broker's database index for the scale-out test; emptied before and after


@pytest.fixture
def database():
    psycopg2 = pytest.importorskip("psycopg2")
    name = f"mlrunway_e2e_{os.getpid()}"
    try:
        admin = psycopg2.connect(host="127.0.0.1", user="postgres", dbname="postgres")
    except psycopg2.OperationalError as exc:
        pytest.skip(f"PostgreSQL is not running on 127.0.0.1:5432 ({exc})")
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        cur.execute(f"CREATE DATABASE {name}")
    yield f"{PG}/{name}"
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin.close()


@pytest.fixture
def broker():
    import redis

    client = redis.Redis(host="127.0.0.1", port=6379, db=REDIS_DB)
    try:
        client.flushdb()
    except redis.ConnectionError as exc:
        pytest.skip(f"Redis is not running on 127.0.0.1:6379 ({exc})")
    yield f"redis://127.0.0.1:6379/{REDIS_DB}"
    client.flushdb()
