import pytest

from broker_core.aws import AwsSettings, InvalidAwsSettingsError


def test_settings_come_from_the_environment():
    settings = AwsSettings.from_env(
        {
            "FLOE_AWS_ENDPOINT_URL": "http://127.0.0.1:5000",
            "AWS_REGION": "eu-west-1",
            "AWS_DEFAULT_REGION": "us-west-2",
            "FLOE_BUCKET": "events",
            "FLOE_TABLE_PREFIX": "prod-",
        }
    )
    assert settings == AwsSettings("http://127.0.0.1:5000", "eu-west-1", "events", "prod-")


def test_default_region_is_used_when_aws_region_is_unset_and_no_endpoint_means_real_aws():
    settings = AwsSettings.from_env({"AWS_DEFAULT_REGION": "us-west-2"})
    assert (settings.endpoint_url, settings.region) == (None, "us-west-2")
    assert settings.boto3_kwargs() == {"region_name": "us-west-2"}


def test_stack_json_aws_object_round_trips():
    settings = AwsSettings("http://127.0.0.1:5000", "us-east-1", "floe-data", "floe-")
    assert settings.to_dict() == {
        "endpoint_url": "http://127.0.0.1:5000",
        "region": "us-east-1",
        "bucket": "floe-data",
        "table_prefix": "floe-",
    }
    assert AwsSettings.from_dict(settings.to_dict()) == settings
    assert settings.boto3_kwargs() == {"region_name": "us-east-1", "endpoint_url": "http://127.0.0.1:5000"}


@pytest.mark.parametrize(
    "data",
    [
        {"endpoint_url": None, "region": "us-east-1", "bucket": "b"},
        {"endpoint_url": None, "region": "us-east-1", "bucket": "b", "table_prefix": "p", "extra": 1},
        {"endpoint_url": 5, "region": "us-east-1", "bucket": "b", "table_prefix": "p"},
        {"endpoint_url": None, "region": None, "bucket": "b", "table_prefix": "p"},
    ],
)
def test_malformed_aws_objects_are_refused(data):
    with pytest.raises(InvalidAwsSettingsError):
        AwsSettings.from_dict(data)
