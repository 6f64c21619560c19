"""GET /v1/whoami: the token's user and role (the dashboard's header)."""
import requests

from test_events import Feed


def test_whoami_names_the_token(tmp_path):
    feed = Feed(tmp_path)
    try:
        me = requests.get(feed.url + "/v1/whoami", headers=feed.alice, timeout=10)
        assert me.status_code == 200 and me.json() == {"user": "alice", "role": "user"}
        assert requests.get(feed.url + "/v1/whoami", headers=feed.admin,
                            timeout=10).json() == {"user": "admin", "role": "admin"}
        assert requests.get(feed.url + "/v1/whoami", timeout=10).status_code == 401
        r = requests.get(feed.url + "/v1/whoami?x=1", headers=feed.alice, timeout=10)
        assert r.status_code == 400 and r.json()["error"]["detail"]["parameter"] == "x"
    finally:
        feed.d.stop()
