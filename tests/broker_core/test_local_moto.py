import boto3

from broker_core.local_moto import start_moto_server


def test_moto_server_answers_dynamodb_and_s3_over_http_until_stopped(moto_server, tmp_path):
    # The session server is only here for the dummy credentials it puts in the environment.
    server = start_moto_server(log_path=tmp_path / "moto.log")
    try:
        kwargs = {"region_name": "us-east-1", "endpoint_url": server.endpoint_url}
        boto3.client("s3", **kwargs).create_bucket(Bucket="probe")
        assert [b["Name"] for b in boto3.client("s3", **kwargs).list_buckets()["Buckets"]] == ["probe"]
        assert boto3.client("dynamodb", **kwargs).list_tables()["TableNames"] == []
        assert server.endpoint_url != moto_server.endpoint_url
    finally:
        server.stop()
    assert server.process.poll() is not None
    server.stop()
