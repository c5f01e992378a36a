"""The committed wire types are what the generator writes from the server's OpenAPI document."""
from __future__ import annotations

import importlib.util
import json
import os
import typing
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
SPEC = os.path.join(os.path.dirname(os.path.dirname(SDK)), "internal", "api", "openapi.json")


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_wire", os.path.join(SDK, "tools", "gen_wire.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@unittest.skipUnless(os.path.exists(SPEC), "the server's internal/api/openapi.json is not beside this SDK")
class WireTest(unittest.TestCase):
    def test_committed_file_is_generated_from_the_current_openapi(self) -> None:
        want = _generator().generate(SPEC)
        with open(os.path.join(SDK, "baton", "_wire.py"), encoding="utf-8") as f:
            got = f.read()
        self.assertTrue(got == want, "baton/_wire.py differs from what tools/gen_wire.py writes from "
                                     "internal/api/openapi.json: run python3 sdk/python/tools/gen_wire.py")

    def test_every_schema_has_its_type_with_its_required_members(self) -> None:
        from baton import _wire
        with open(SPEC, encoding="utf-8") as f:
            schemas = json.load(f)["components"]["schemas"]
        self.assertEqual(sorted(_wire.__all__), sorted(schemas))
        claim = _wire.StreamClaim
        self.assertIn("job_id", claim.__required_keys__)
        self.assertIn("lease_token", claim.__required_keys__)
        self.assertIn("traceparent", claim.__optional_keys__)
        hints = typing.get_type_hints(_wire.JobCreated)
        self.assertIs(hints["totalTasks"], int)

    def test_generator_detects_a_change(self) -> None:
        gen = _generator()
        with open(SPEC, encoding="utf-8") as f:
            spec = json.load(f)
        spec["components"]["schemas"]["JobCreated"]["properties"]["newMember"] = {"type": "string"}
        self.assertIn("newMember: str", gen.Gen(spec).emit())
        self.assertNotEqual(gen.Gen(spec).emit(), gen.generate(SPEC))


if __name__ == "__main__":
    unittest.main()
