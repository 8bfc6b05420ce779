"""Client quotas in Kafka's model (KIP-13, KIP-55, KIP-124, KIP-219, KIP-257, KIP-599).

`entities` holds who a quota applies to and Kafka's precedence order, `rates` the sampled rate and
token bucket they are measured with, `manager` a broker's enforcement (`QuotaManager`), `store`
their home in DynamoDB (`QuotaStore`) and `admin` the semantics of AlterClientQuotas and
DescribeClientQuotas.
"""
