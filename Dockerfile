# syntax=docker/dockerfile:1.7
# The Floe broker image: one broker process (python -m broker_core.server) per container.
#
# In the ECS task of template.yaml the container runs with host networking, the instance-store NVMe
# mounted at /var/lib/floe and the instance's identity files at /etc/floe (broker-id, rack and
# advertised-host, written by the launch template's user data). Each can be overridden by
# FLOE_BROKER_ID, FLOE_RACK and FLOE_ADVERTISED_HOST; FLOE_BROKER_SETTINGS holds Kafka broker
# settings as space-separated key=value pairs. AWS settings come from AWS_REGION, FLOE_BUCKET,
# FLOE_TABLE_PREFIX (and FLOE_AWS_ENDPOINT_URL off AWS); credentials from the task role.
# The broker logs one JSON object per line (FLOE_LOG_FORMAT=json, floe.log.format) for CloudWatch Logs.
#
#   docker build -t floe-broker .

FROM python:3.12-slim AS wheels
WORKDIR /src
COPY pyproject.toml README.md ./
COPY broker_core broker_core
COPY tiered_storage tiered_storage
COPY functions functions
COPY emr_jobs emr_jobs
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.12-slim
RUN useradd --system --uid 10001 --home-dir /var/lib/floe floe \
    && mkdir -p /var/lib/floe \
    && chown floe:floe /var/lib/floe
COPY --from=wheels /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
ENV FLOE_LOG_FORMAT=json
COPY <<'EOF' /usr/local/bin/floe-broker
#!/bin/sh
# Start one broker with the identity of the instance it runs on.
set -eu
identity() {  # $1: variable that overrides, $2: file under /etc/floe
    eval "value=\${$1:-}"
    if [ -z "$value" ] && [ -r "/etc/floe/$2" ]; then value=$(cat "/etc/floe/$2"); fi
    printf '%s' "$value"
}
broker_id=$(identity FLOE_BROKER_ID broker-id)
if [ -z "$broker_id" ]; then
    echo "floe-broker: no broker id (set FLOE_BROKER_ID or mount /etc/floe/broker-id)" >&2
    exit 2
fi
set -- --broker-id "$broker_id" --host 0.0.0.0 --port "${FLOE_PORT:-9092}" --data-dir /var/lib/floe/logs "$@"
advertised=$(identity FLOE_ADVERTISED_HOST advertised-host)
if [ -n "$advertised" ]; then set -- "$@" --advertised-host "$advertised"; fi
rack=$(identity FLOE_RACK rack)
if [ -n "$rack" ]; then set -- "$@" --rack "$rack"; fi
for setting in ${FLOE_BROKER_SETTINGS:-}; do set -- "$@" --set "$setting"; done
exec python -m broker_core.server "$@"
EOF
RUN chmod 0755 /usr/local/bin/floe-broker
USER floe
VOLUME ["/var/lib/floe"]
EXPOSE 9092
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/floe-broker"]
