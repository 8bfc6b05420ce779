// KafkaJS, unchanged, running transactions against Floe. Driven by test_transactions_kafkajs.py.
//
//   node transactions.js produce   BOOTSTRAP TOPIC TRANSACTIONAL_ID
//       three transactions over the topic's partitions: commit, abort, commit; prints what each held
//   node transactions.js transform BOOTSTRAP SOURCE SINK GROUP TRANSACTIONAL_ID EXPECTED
//       consume-transform-produce: each batch of SOURCE (read_committed) is written to SINK with
//       the group's offsets in one transaction, until EXPECTED records were transformed
//   node transactions.js consume   BOOTSTRAP TOPIC GROUP EXPECTED
//       a read_committed group consumer; prints the values once EXPECTED were read
//
// Output: one JSON object on stdout. Exit status 1 with the error on stderr on any failure.
'use strict'
const { Kafka, logLevel } = require('kafkajs')

const TIMEOUT_MS = 60000

function client (bootstrap) {
  return new Kafka({ clientId: 'floe-kafkajs-compat', brokers: bootstrap.split(','), logLevel: logLevel.WARN,
    retry: { retries: 8 } })
}

async function produce (bootstrap, topic, transactionalId) {
  const producer = client(bootstrap).producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  const outcome = { committed: [], aborted: [] }
  const plan = [['committed', 'c', 0, 10], ['aborted', 'a', 0, 5], ['committed', 'c', 10, 15]]
  for (const [ending, prefix, from, to] of plan) {
    const transaction = await producer.transaction()
    const messages = []
    for (let i = from; i < to; i++) {
      messages.push({ key: `k-${i}`, value: `${prefix}-${i}`, partition: i % 3 })
    }
    await transaction.send({ topic, messages })
    if (ending === 'committed') await transaction.commit()
    else await transaction.abort()
    outcome[ending].push(...messages.map(m => m.value))
  }
  await producer.disconnect()
  return outcome
}

async function transform (bootstrap, source, sink, groupId, transactionalId, expected) {
  const kafka = client(bootstrap)
  const producer = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 })
  const consumer = kafka.consumer({ groupId, readUncommitted: false })
  await producer.connect()
  await consumer.connect()
  await consumer.subscribe({ topic: source, fromBeginning: true })
  let transformed = 0
  const finished = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`transformed ${transformed} of ${expected} in ${TIMEOUT_MS} ms`)),
      TIMEOUT_MS)
    consumer.run({
      autoCommit: false,
      eachBatch: async ({ batch }) => {
        if (batch.messages.length === 0) return
        const transaction = await producer.transaction()
        try {
          await transaction.send({
            topic: sink,
            messages: batch.messages.map(m => ({ key: m.key, value: `t-${m.value.toString()}`, partition: batch.partition }))
          })
          const next = (BigInt(batch.lastOffset()) + 1n).toString()
          await transaction.sendOffsets({ consumerGroupId: groupId,
            topics: [{ topic: batch.topic, partitions: [{ partition: batch.partition, offset: next }] }] })
          await transaction.commit()
        } catch (error) {
          await transaction.abort()
          throw error
        }
        transformed += batch.messages.length
        if (transformed >= expected) {
          clearTimeout(timer)
          resolve()
        }
      }
    }).catch(reject)
  })
  await finished
  await consumer.disconnect()
  await producer.disconnect()
  return { transformed }
}

async function consume (bootstrap, topic, groupId, expected) {
  const consumer = client(bootstrap).consumer({ groupId, readUncommitted: false })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const values = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`read ${values.length} of ${expected} in ${TIMEOUT_MS} ms`)),
      TIMEOUT_MS)
    consumer.run({
      eachMessage: async ({ message }) => {
        values.push(message.value.toString())
        if (values.length >= expected) {
          clearTimeout(timer)
          resolve()
        }
      }
    }).catch(reject)
  })
  // Anything beyond ``expected`` that is already fetchable would be a record that should not be there.
  await new Promise(resolve => setTimeout(resolve, 1000))
  await consumer.disconnect()
  return { values }
}

async function main () {
  const [mode, ...args] = process.argv.slice(2)
  let result
  if (mode === 'produce') result = await produce(args[0], args[1], args[2])
  else if (mode === 'transform') result = await transform(args[0], args[1], args[2], args[3], args[4], Number(args[5]))
  else if (mode === 'consume') result = await consume(args[0], args[1], args[2], Number(args[3]))
  else throw new Error(`unknown mode ${mode}`)
  process.stdout.write(JSON.stringify(result) + '\n')
}

main().then(() => process.exit(0), error => {
  process.stderr.write(`${error.stack || error}\n`)
  process.exit(1)
})
