"""``python -m tailhound.capacity.fake_engine``: the fake engine on a loopback port (:func:`.serve.main`)."""

from .serve import main

main()
