"""claude through the SDK's own clients for Anthropic, Bedrock and Vertex, each against the
strict fake at its own routes, with each platform's credential convention."""
from __future__ import annotations

import sys

import pytest

from agent.researchers.base import ResearcherError
from agent.researchers.claude import ClaudeResearcher
from agent.researchers.settings import ClaudeSettings
from tests.fakes.anthropic_api import FakeAnthropic, message, tool_use
from tests.researchers.test_claude_researcher import GOOD_EDIT, make_context, submit
from tests.needs import needs

AWS_KEY_ID, AWS_SECRET = "AKIAFAKEKEYID0000001", "fake/aws/secret/access/key/0123456789abcdef"
BEDROCK_TOKEN = "bedrock-api-key-fake-0123456789abcdef"
VERTEX_TOKEN = "ya29.fake-vertex-access-token-0123456789"


def good_turn():
    return message([tool_use("edit_file", GOOD_EDIT), tool_use("submit", submit())])


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "AWS_ACCESS_KEY_ID",
                 "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_BEARER_TOKEN_BEDROCK",
                 "AWS_REGION", "AWS_DEFAULT_REGION", "CLOUD_ML_REGION", "ANTHROPIC_VERTEX_PROJECT_ID",
                 "GOOGLE_OAUTH_ACCESS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    return monkeypatch


def _no_secret_anywhere(fake, tmp_path, *secrets):
    for request in fake.requests:
        for secret in secrets:
            assert secret.encode() not in request.body
    for path in tmp_path.rglob("*"):
        if path.is_file():
            for secret in secrets:
                assert secret not in path.read_text(errors="replace"), path


@needs("bedrock")
def test_bedrock_signs_with_aws_credentials(clean_env, tmp_path):
    clean_env.setenv("AWS_ACCESS_KEY_ID", AWS_KEY_ID)
    clean_env.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    with FakeAnthropic([good_turn()], credentials=[AWS_KEY_ID]) as fake:
        settings = ClaudeSettings(provider="bedrock", region="us-east-1", base_url=fake.url,
                                  model="us.anthropic.claude-sonnet-4-6-v1:0")
        proposal = ClaudeResearcher(tmp_path / "state", settings).propose(make_context())

    assert fake.rejections == []
    request = fake.requests[0]
    assert request.path == "/model/us.anthropic.claude-sonnet-4-6-v1:0/invoke"
    assert request.headers["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={AWS_KEY_ID}/")
    assert "anthropic_version" in request.json and "model" not in request.json
    assert proposal.usage.usd > 0                                   # priced as claude-sonnet-4-6
    _no_secret_anywhere(fake, tmp_path, AWS_SECRET)
    assert all(AWS_SECRET not in value for value in request.headers.values())


def test_bedrock_takes_an_api_key_as_a_bearer_token(clean_env, tmp_path):
    clean_env.setenv("AWS_BEARER_TOKEN_BEDROCK", BEDROCK_TOKEN)
    with FakeAnthropic([good_turn()], credentials=[BEDROCK_TOKEN]) as fake:
        settings = ClaudeSettings(provider="bedrock", region="eu-west-1", base_url=fake.url,
                                  model="anthropic.claude-haiku-4-5-v1:0")
        ClaudeResearcher(tmp_path / "state", settings).propose(make_context())
    assert fake.requests[0].headers["authorization"] == f"Bearer {BEDROCK_TOKEN}"
    _no_secret_anywhere(fake, tmp_path, BEDROCK_TOKEN)


def test_bedrock_without_botocore_names_the_extra_before_any_request(clean_env, tmp_path):
    clean_env.setitem(sys.modules, "botocore", None)     # as where the extra is not installed
    clean_env.setenv("AWS_ACCESS_KEY_ID", AWS_KEY_ID)
    clean_env.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    with pytest.raises(ResearcherError, match=r"botocore.*pip install -e '\.\[bedrock\]'.*AWS_BEARER_TOKEN_BEDROCK"):
        ClaudeResearcher(tmp_path, ClaudeSettings(provider="bedrock", region="us-east-1",
                                                  model="anthropic.claude-haiku-4-5-v1:0"))


def test_bedrock_without_a_region_says_where_to_set_one(clean_env, tmp_path):
    clean_env.setenv("AWS_BEARER_TOKEN_BEDROCK", BEDROCK_TOKEN)
    with pytest.raises(ResearcherError, match="claude.provider bedrock.*region"):
        ClaudeResearcher(tmp_path, ClaudeSettings(provider="bedrock", model="anthropic.claude-haiku-4-5-v1:0"))


def test_vertex_uses_its_route_region_project_and_token(clean_env, tmp_path):
    clean_env.setenv("GOOGLE_OAUTH_ACCESS_TOKEN", VERTEX_TOKEN)
    clean_env.setenv("ANTHROPIC_VERTEX_PROJECT_ID", "night-lab")
    with FakeAnthropic([good_turn()], credentials=[VERTEX_TOKEN]) as fake:
        settings = ClaudeSettings(provider="vertex", region="us-east5", base_url=f"{fake.url}/v1")
        ClaudeResearcher(tmp_path / "state", settings).propose(make_context())

    assert fake.rejections == []
    assert fake.requests[0].path == ("/v1/projects/night-lab/locations/us-east5/publishers/anthropic/"
                                     "models/claude-sonnet-5-5:rawPredict")
    assert fake.requests[0].headers["authorization"] == f"Bearer {VERTEX_TOKEN}"
    _no_secret_anywhere(fake, tmp_path, VERTEX_TOKEN)


def test_vertex_without_credentials_or_region_names_the_fix(clean_env, tmp_path):
    clean_env.setitem(sys.modules, "google.auth", None)     # as where google-auth is not installed
    with pytest.raises(ResearcherError, match="google-auth|GOOGLE_OAUTH_ACCESS_TOKEN"):
        ClaudeResearcher(tmp_path, ClaudeSettings(provider="vertex", region="us-east5"))
    clean_env.setenv("GOOGLE_OAUTH_ACCESS_TOKEN", VERTEX_TOKEN)
    with pytest.raises(ResearcherError, match="claude.region"):
        ClaudeResearcher(tmp_path, ClaudeSettings(provider="vertex"))


def test_effort_is_sent_as_output_config(clean_env, tmp_path):
    clean_env.setenv("ANTHROPIC_API_KEY", "sk-ant-effort-0123456789")
    with FakeAnthropic([good_turn()]) as fake:
        ClaudeResearcher(tmp_path, ClaudeSettings(base_url=fake.url, effort="low")).propose(make_context())
    assert fake.requests[0].json["output_config"] == {"effort": "low"}
