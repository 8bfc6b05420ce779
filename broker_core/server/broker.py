"""A broker node: its membership in the cluster and the duties that come with it.

The broker's pieces (listener and request handlers, replica fetchers, ISR manager, group
coordinator, tiering service) are built in one place, `broker_core.server.assembly`, and reach the
broker only through the `BrokerContext` protocol; this module imports none of them.

Start-up: create the DynamoDB tables if missing, listen, register (getting a broker epoch), read the
metadata snapshot and open the replicas assigned here. Then, until stopped, these loops run:
heartbeat (re-registering with a new epoch if the controller fenced us), metadata poll (a consistent
read of the version item; a new version means reading what changed: only the partitions named by
the change sequence when every version between was a partition change, else a new snapshot), the
controller role (try the lease, and while holding it fence stalled brokers, elect leaders and complete
partition reassignments whose new replicas are in sync, at the metadata poll cadence), log
retention, the ISR check and the high-watermark checkpoint.
pynamodb is synchronous, so every DynamoDB call runs in a worker thread, never on the event loop.

The broker owns its `BrokerMetrics` and, with ``metrics.port`` set, serves them on the event loop
(broker_core.metrics.endpoint); it counts its controller's elections itself.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from broker_core.log.log_directories import remove_directory
from broker_core.metadata.cluster_reads import ClusterItems, read_cluster_items
from broker_core.metadata.controller import Controller, ControllerLease
from broker_core.metadata.errors import BrokerFencedError, FencedControllerError, MetadataError
from broker_core.metadata.image import MetadataImage
from broker_core.metadata.reassignment import PartitionReassignments
from broker_core.metadata.state import BrokerState, PartitionState
from broker_core.metadata.store import MetadataStore
from broker_core.metrics.broker import BrokerMetrics
from broker_core.metrics.endpoint import MetricsEndpoint
from broker_core.security.authorizer import Authorizer
from broker_core.settings import effective

from .config import BrokerConfig
from .partition import write_high_watermark_checkpoint
from .replica_manager import ReplicaManager

log = logging.getLogger(__name__)
ISR_CHECK_INTERVAL_S = 0.25
# Requests naming topics this broker has not heard of share one version check per this interval.
CATCH_UP_INTERVAL_S = 0.1
# How often the broker looks for -delete directories whose file.delete.delay.ms has passed.
LOG_DELETION_CHECK_INTERVAL_S = 1.0
NO_CONTROLLER_EPOCH = -1


class BrokerService(Protocol):
    """A subsystem hosted by the broker that runs background work (consumer groups, tiering)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class Listener(Protocol):
    async def start(self) -> int: ...

    def advertised_endpoints(self) -> dict[str, tuple[str, int]]:
        """Each listener's name and the (host, port) clients are told, once started."""
        ...

    async def stop(self) -> None: ...


class ReplicaFetchers(Protocol):
    async def update(self) -> None: ...

    async def stop(self) -> None: ...


class IsrDuty(Protocol):
    async def run_once(self) -> None: ...


class MetadataFollower(Protocol):
    """Cluster state cached beside the metadata image (client quotas), re-read with every refresh."""

    async def reload(self) -> None: ...


@dataclass(frozen=True)
class BrokerParts:
    """The pieces `broker_core.server.assembly` builds around a broker and hands in with `Broker.host`."""

    listener: Listener
    fetchers: ReplicaFetchers
    isr: IsrDuty
    services: Sequence[BrokerService]
    followers: Sequence[MetadataFollower] = ()



async def _run_duty(duty: Callable[..., Awaitable[None]], *args: object) -> None:
    """One run of a periodic duty: its failure is logged (a metadata store failure as a warning), never
    raised, so the duty runs again at its next turn."""
    try:
        await duty(*args)
    except asyncio.CancelledError:
        raise
    except MetadataError as exc:
        log.warning("%s: %s", duty.__name__, exc)
    except Exception:
        log.exception("%s failed", duty.__name__)

class Broker:
    """One broker node's membership in the cluster: registration, metadata, controller role, duties.

    It owns the broker's settings, its metadata store, the current `MetadataImage` and the hosted
    replicas, and implements `BrokerContext` for the services around it (handlers, fetchers, ISR
    manager, group coordinator, tiering), which the assembly builds and hands in with `host` before
    `start`. Invariants: the image only moves forward in version and is replaced whole, under
    ``_refresh_lock``, with the replicas and fetchers brought in line before the lock is released; the
    broker epoch is the one DynamoDB returned for the latest registration. Everything runs on one
    event loop; DynamoDB calls go to worker threads.
    """

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.store = MetadataStore(config.aws)
        self.image = MetadataImage()
        self.replicas = ReplicaManager(config)
        self.authorizer = Authorizer.from_settings(config.overrides)
        self.cluster_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"floe:{config.aws.table_prefix}"))
        self.broker_epoch = -1
        session_ms = config.get_int("broker.session.timeout.ms")
        self.lease = ControllerLease(self.store, lease_duration_ms=session_ms)
        self.controller: Controller | None = None
        self.reassignments = PartitionReassignments(self.store)
        self.heartbeat_observer = Controller(
            self.store, controller_epoch=NO_CONTROLLER_EPOCH,
            session_timeout_ms=config.get_int("broker.session.timeout.ms"),
        )
        self._parts: BrokerParts | None = None
        # The broker's heartbeat and the controller's lease renewal run in threads of their own (see
        # `_PeriodicThread`), started once the broker is registered.
        self._heartbeats: _PeriodicThread | None = None
        self._lease_renewal: _PeriodicThread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session_s = config.get_int("broker.session.timeout.ms") / 1000
        self._last_heartbeat_at: float | None = None
        self._last_heartbeat_s = 0.0
        self._tasks: list[asyncio.Task] = []
        self._refresh_lock = asyncio.Lock()
        self._leader_rebalance_due = float("inf")
        self._catch_up: asyncio.Task | None = None
        self._catch_up_started = float("-inf")
        # The latest periodic read of the cluster items (see `_read_cluster`) and the wake-ups of the
        # two duties that act on it.
        self._cluster_read: ClusterItems | None = None
        self._polled_at_ms = float("-inf")
        self._poll_wakeup = asyncio.Event()
        self._duty_wakeup = asyncio.Event()
        self._stopping = False
        self.port = config.port
        self.endpoints: dict[str, tuple[str, int]] = {}
        metrics_port = config.get_int("metrics.port")
        self.metrics = BrokerMetrics(enabled=metrics_port >= 0, slow_request_ms=config.get_int("floe.request.slow.ms"))
        self._metrics_endpoint = (MetricsEndpoint(self.metrics.collect, config.host, metrics_port)
                                  if metrics_port >= 0 else None)
        self.metrics_port: int | None = None  # bound once started, with an endpoint

    def host(self, parts: BrokerParts) -> None:
        """Take the listener, fetchers, ISR manager and services built around this broker."""
        self._parts = parts

    @property
    def parts(self) -> BrokerParts:
        if self._parts is None:
            raise RuntimeError("the broker was not assembled: build it with broker_core.server.assembly")
        return self._parts

    # lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        started = time.monotonic()
        await asyncio.to_thread(self.store.ensure_tables)
        parts = self.parts
        self.port = await parts.listener.start()
        self.endpoints = parts.listener.advertised_endpoints()
        if self._metrics_endpoint is not None:
            self.metrics_port = await self._metrics_endpoint.start()
        self.broker_epoch = await asyncio.to_thread(self._register)
        log.info("broker %d registered with epoch %d, listening on %s:%d",
                 self.config.broker_id, self.broker_epoch, self.config.host, self.port)
        heartbeat_s = self.config.get_int("broker.heartbeat.interval.ms") / 1000
        # Heartbeats (and the lease renewal, once this broker holds the lease) start as soon as the
        # broker is registered: reading the metadata, opening (recovering) every hosted replica and
        # starting the services can outlast a session timeout at a thousand partitions, and a
        # broker silent that long is fenced by the controller (and a lease holder loses the lease)
        # before it serves a request.
        self._loop = asyncio.get_running_loop()
        self._heartbeats = _PeriodicThread("heartbeat", heartbeat_s, self._heartbeat)
        self._lease_renewal = _PeriodicThread("controller-lease", heartbeat_s, self._renew_controller_lease)
        self._heartbeats.start()
        self._lease_renewal.start()
        # Try for the controller role before serving, so the first Metadata answer names a controller
        # (librdkafka waits minutes before asking again when it was told there is none).
        registered = time.monotonic()
        await self._controller_duty()
        await self.refresh_metadata()
        # Only now, with a whole image applied, is it known which directories hold logs this broker
        # no longer hosts: they go before anything could serve them (Kafka's stray-log check).
        self.replicas.remove_stray_logs(self.image)
        read = time.monotonic()
        # Independent of each other (each opens its own tables and clients), so they start together:
        # one after another, their AWS clients and table checks added up to tens of seconds under load.
        await asyncio.gather(*(service.start() for service in parts.services))
        log.info("broker %d started in %.1f s: registered after %.1f s, metadata read and %d replicas open "
                 "after %.1f s more, services started in %.1f s", self.config.broker_id, time.monotonic() - started,
                 registered - started, len(self.replicas.partitions), read - registered, time.monotonic() - read)
        self._tasks = [
            asyncio.create_task(self._every(self.controller_check_interval_s(), self._read_cluster),
                                name="cluster-reads"),
            asyncio.create_task(self._on_cluster_reads(self._poll_wakeup, self._apply_metadata_version),
                                name="metadata-poll"),
            asyncio.create_task(self._on_cluster_reads(self._duty_wakeup, self._controller_duty), name="controller"),
            asyncio.create_task(self._every(self.config.get_int("log.retention.check.interval.ms") / 1000,
                                            self._enforce_retention), name="retention"),
            asyncio.create_task(self._every(ISR_CHECK_INTERVAL_S, parts.isr.run_once), name="isr"),
            asyncio.create_task(self._every(self.config.get_int("replica.high.watermark.checkpoint.interval.ms") / 1000,
                                            self._checkpoint_high_watermarks), name="hw-checkpoint"),
            asyncio.create_task(self._every(LOG_DELETION_CHECK_INTERVAL_S, self._delete_logs), name="delete-logs"),
        ]
        lag_sample_s = self.config.get_int("floe.event.loop.lag.sample.ms") / 1000
        if lag_sample_s > 0 and self.metrics.enabled:
            self._tasks.append(asyncio.create_task(self._sample_event_loop_lag(lag_sample_s), name="loop-lag"))

    async def stop(self, *, controlled: bool = True) -> None:
        # The controller duty goes first: run during the shutdown it would take back the lease
        # that controlled shutdown gives up.
        await self._cancel_tasks(("controller",))
        if self._lease_renewal is not None:
            await self._lease_renewal.stop()
        if controlled and self.config.get_bool("controlled.shutdown.enable") and self.broker_epoch >= 0:
            try:
                await self._controlled_shutdown()
            except MetadataError as exc:
                log.warning("controlled shutdown could not be completed: %s", exc)
        # No more metadata refreshes from here on, so none can start fetchers that are being stopped
        # or reopen replicas that are being closed.
        await self._cancel_tasks(None)
        if self._heartbeats is not None:
            await self._heartbeats.stop()
        self._stopping = True
        if self._catch_up is not None:
            self._catch_up.cancel()
            await asyncio.gather(self._catch_up, return_exceptions=True)
        parts = self.parts
        await parts.fetchers.stop()
        for service in reversed(parts.services):
            await service.stop()
        await parts.listener.stop()
        if self._metrics_endpoint is not None:
            await self._metrics_endpoint.stop()
        self.replicas.close()

    async def _cancel_tasks(self, names: tuple[str, ...] | None) -> None:
        """Cancel the periodic tasks with these names (all of them for None) and wait for them to end."""
        chosen = [t for t in self._tasks if names is None or t.get_name() in names]
        for task in chosen:
            task.cancel()
        await asyncio.gather(*chosen, return_exceptions=True)
        self._tasks = [t for t in self._tasks if t not in chosen]

    async def _controlled_shutdown(self) -> None:
        """Hand leadership to other ISR members before exiting, while still serving requests.

        The broker marks itself SHUTTING_DOWN (it then never rejoins an ISR) and the controller moves
        its leaderships; if this broker is the controller it does that itself, then gives up the
        lease. It waits, bounded by the session timeout, until it leads nothing that has another
        live ISR member.
        """
        me, epoch = self.config.broker_id, self.broker_epoch
        if self.controller is not None and self.lease.controller_epoch is not None:
            started = time.perf_counter()
            done = await asyncio.to_thread(self.controller.controlled_shutdown, me, epoch)
            self._count_elections(done.changed_partitions, done.shutdown_moves, started)
            await asyncio.to_thread(self.lease.release)
            self.controller = None
        else:
            await asyncio.to_thread(self.store.set_broker_state, me, epoch, BrokerState.SHUTTING_DOWN)
        deadline = asyncio.get_running_loop().time() + self.config.get_int("broker.session.timeout.ms") / 1000
        while asyncio.get_running_loop().time() < deadline:
            await self.refresh_metadata()
            leading = [p for p in self.replicas.partitions.values() if p.is_leader and len(p.isr) > 1]
            if not leading:
                break
            await asyncio.sleep(self.config.get_int("metadata.poll.interval.ms") / 1000)
        log.info("broker %d finished controlled shutdown", me)

    # cluster duties ----------------------------------------------------------------------------

    async def _every(self, interval_s: float, duty: Callable[[], Awaitable[None]]) -> None:
        while True:
            await _run_duty(duty)
            await asyncio.sleep(interval_s)

    async def _sample_event_loop_lag(self, interval_s: float) -> None:
        """Record how late a timer of ``interval_s`` fires: the time the loop spent on other work past it
        (a blocking system call, a long Python step), which every request waiting on the loop waited too."""
        observe = self.metrics.event_loop_lag.observe
        while True:
            started = time.monotonic()
            await asyncio.sleep(interval_s)
            observe(max(0.0, time.monotonic() - started - interval_s))

    def _heartbeat(self) -> None:
        """One heartbeat, in the heartbeat thread; re-registers (a new broker epoch) if fenced."""
        started = time.monotonic()
        if self._last_heartbeat_at is not None:
            # A late heartbeat is the first sign of a broker about to be fenced while alive: the
            # previous call was slow (DynamoDB), or the process got no CPU for that long.
            gap = started - self._last_heartbeat_at
            if gap > self._session_s / 2:
                log.warning("heartbeat %.1f s after the previous one began (the call took %.1f s); session "
                            "timeout %.1f s", gap, self._last_heartbeat_s, self._session_s)
        self._last_heartbeat_at = started
        try:
            self.store.heartbeat_broker(self.config.broker_id, self.broker_epoch)
        except BrokerFencedError:
            log.warning("broker %d was fenced at epoch %d; registering again", self.config.broker_id, self.broker_epoch)
            self.broker_epoch = self._register()
        finally:
            self._last_heartbeat_s = time.monotonic() - started

    def _register(self) -> int:
        """Register with the inter-broker listener's endpoint as the broker's host and port (what other
        brokers connect to), every listener's endpoint by name (what clients are told), and the
        principal this broker authenticates as to its peers (what trusted replication checks)."""
        host, port = self.endpoints[self.config.listeners.inter_broker]
        return self.store.register_broker(self.config.broker_id, host, port, self.config.broker_rack, self.endpoints,
                                          principal=self.config.inter_broker_principal)

    def advertised_endpoint(self, listener_name: str) -> tuple[str, int]:
        """This broker's (host, port) on the listener named (the inter-broker one for "")."""
        return self.endpoints[listener_name or self.config.listeners.inter_broker]

    async def _poll_metadata(self) -> None:
        version = await asyncio.to_thread(self.store.metadata_version)
        if version != self.image.version:
            await self.refresh_metadata(unless_at=version)

    async def _read_cluster(self) -> None:
        """The periodic read that the metadata poll and the controller duty share, every
        `controller_check_interval_s`: the metadata version, the controller lease unless this broker
        holds it, and the heartbeats of the brokers this broker knows (its image's and those its
        controller duty watches), in one consistent BatchGetItem (`read_cluster_items`). Each duty
        acts on the latest read in a task of its own, so a long metadata refresh or controller pass
        holds back neither the reads nor the other duty; a duty still busy when a read arrives takes
        the newest one when it is done.

        Before, the heartbeats were a Scan of the brokers table per pass, a second call: a broker
        registered since the image's version is now watched from the read after the poll that
        applies its registration (one interval later), which only delays when a broker that dies
        right after registering can be fenced, by that interval.
        """
        at_ms = time.monotonic() * 1000
        holds_lease = self.controller is not None and self.lease.controller_epoch is not None
        brokers = set(self.image.brokers) | self.heartbeat_observer.watched_broker_ids()
        self._cluster_read = await asyncio.to_thread(read_cluster_items, self.store.models, brokers,
                                                     lease=not holds_lease, at_ms=at_ms)
        self._poll_wakeup.set()
        self._duty_wakeup.set()

    async def _on_cluster_reads(self, wakeup: asyncio.Event, duty: Callable[[ClusterItems], Awaitable[None]]) -> None:
        """Run ``duty`` with the latest cluster read each time a new one arrives (see `_read_cluster`)."""
        while True:
            await wakeup.wait()
            wakeup.clear()
            read = self._cluster_read
            if read is None:
                continue
            await _run_duty(duty, read)

    async def _apply_metadata_version(self, read: ClusterItems) -> None:
        """The metadata poll: read the change sequence when the version moved past this broker's image.

        Once per ``metadata.poll.interval.ms``: the reads come every `controller_check_interval_s`,
        which is the poll interval unless the heartbeat interval is shorter; then the poll takes the
        first read at least a poll interval after the one it last took.
        """
        if read.at_ms - self._polled_at_ms < self.config.get_int("metadata.poll.interval.ms"):
            return
        self._polled_at_ms = read.at_ms
        if read.version != self.image.version:
            await self.refresh_metadata(unless_at=read.version)

    async def catch_up_metadata(self, min_interval_s: float = CATCH_UP_INTERVAL_S) -> None:
        """Read the metadata version, and the snapshot if it changed, in a check that starts after
        this call: called before answering that a topic is unknown, since it may have been created
        after this broker's last poll (a client that creates a topic and at once produces to it
        would otherwise be told it does not exist). Callers share checks, and a check starts at
        most once per ``min_interval_s``, so requests for topics that do not exist cost at most one
        DynamoDB read per interval and wait at most about two intervals."""
        loop = asyncio.get_running_loop()
        asked_at = loop.time()
        while not self._stopping:
            check, started = self._catch_up, self._catch_up_started
            if check is not None:
                try:
                    await asyncio.shield(check)
                except asyncio.CancelledError:
                    if not check.cancelled():
                        raise  # this caller was cancelled
                    return  # the broker is stopping
                if started >= asked_at:
                    return
                if self._catch_up is check:
                    # Finished before its done callback ran (this caller arrived in between). Drop it
                    # here: looping on a finished future would never yield to the event loop.
                    self._catch_up = None
                continue  # it started before this call: it may have missed what the caller asks about
            wait_s = self._catch_up_started + min_interval_s - loop.time()
            if wait_s > 0:
                await asyncio.sleep(wait_s)
                continue
            self._start_catch_up()

    def recheck_metadata_soon(self, min_interval_s: float) -> None:
        """Start the shared version check of `catch_up_metadata` without waiting for it, unless one
        is running or started within ``min_interval_s``: replica fetchers call this while their
        leader is gone or refusing, to learn of the new leader before the next regular poll."""
        if self._catch_up is None and not self._stopping and (
                asyncio.get_running_loop().time() - self._catch_up_started >= min_interval_s):
            self._start_catch_up()

    def _start_catch_up(self) -> None:
        self._catch_up_started = asyncio.get_running_loop().time()
        self._catch_up = asyncio.ensure_future(self._checked_poll())
        self._catch_up.add_done_callback(self._catch_up_done)

    def _catch_up_done(self, check: asyncio.Future) -> None:
        if self._catch_up is check:
            self._catch_up = None

    async def _checked_poll(self) -> None:
        try:
            await self._poll_metadata()
        except MetadataError as exc:
            log.warning("metadata catch-up failed: %s", exc)
        except Exception:
            # Requests are then answered from the image this broker has.
            log.exception("metadata catch-up failed")

    async def refresh_metadata(self, *, unless_at: int | None = None) -> None:
        """Read a new snapshot and apply it; with ``unless_at``, not if a refresh that finished
        while this one waited for the lock already brought the image to that version."""
        async with self._refresh_lock:
            if unless_at is not None and self.image.version >= unless_at:
                return
            if unless_at is not None and await self._apply_delta(unless_at):
                return
            # Independent reads, so they overlap: the refresh is on the failover path. Followers
            # (client quotas) re-read what they cache; each handles its own failures.
            snapshot, lease, *_ = await asyncio.gather(asyncio.to_thread(self.store.snapshot),
                                                       asyncio.to_thread(self.lease.current),
                                                       *(follower.reload() for follower in self.parts.followers))
            image = MetadataImage.from_snapshot(snapshot, controller_id=lease.holder if lease else -1)
            # Replicas new here are opened (their logs recovered) off the event loop: see ReplicaManager.
            opened = await asyncio.to_thread(self.replicas.open_missing, image)
            self.image = image
            # floe.super.users.include.brokers: a broker registered since the last image is trusted now.
            self.authorizer.replace_broker_principals(b.principal for b in image.brokers.values())
            self.replicas.apply(image, opened=opened)
            self.metrics.forget_topics_except(image.topics)
            await self.parts.fetchers.update()

    async def _apply_delta(self, version: int) -> bool:
        """Bring the image to ``version`` from the change sequence (``MetadataStore.metadata_delta``):
        partition changes, topics created, grown, reconfigured or deleted, brokers registered, fenced
        or shutting down, a new controller; False if the versions between hold any other kind of
        change (then the caller reads a whole snapshot)."""
        delta = await asyncio.to_thread(self.store.metadata_delta, self.image.version, version)
        if delta is None:
            return False
        image = self.image.with_delta(version, delta)
        if image is None:
            return False
        started = time.monotonic()
        changed = self.image.keys_changed_by(delta)
        opened = await asyncio.to_thread(self.replicas.open_missing, image, changed)
        self.image = image
        if delta.brokers:
            # floe.super.users.include.brokers: a broker registered since the last image is trusted now.
            self.authorizer.replace_broker_principals(b.principal for b in image.brokers.values())
        self.replicas.apply(image, changed=changed, opened=opened)
        if delta.deleted_topic_ids:
            self.metrics.forget_topics_except(image.topics)
        await self.parts.fetchers.update()
        # Rare changes are logged; partition changes are counted in metrics instead.
        if delta.topics or delta.deleted_topic_ids or delta.brokers or delta.broker_states or delta.controller_id:
            log.info("metadata version %d applied from the change sequence: topics %s created or changed, %d "
                     "deleted, %d partitions, %d replicas opened, brokers %s registered, states %s, controller %s, "
                     "in %.2f s", version, sorted(delta.topics), len(delta.deleted_topic_ids), len(delta.partitions),
                     len(opened), sorted(delta.brokers),
                     {b: state.value for b, (_, state) in sorted(delta.broker_states.items())},
                     delta.controller_id, time.monotonic() - started)
        return True

    def controller_check_interval_s(self) -> float:
        """How often the controller duty runs: the metadata poll interval, at most the heartbeat interval."""
        return min(self.config.get_int("metadata.poll.interval.ms"),
                   self.config.get_int("broker.heartbeat.interval.ms")) / 1000

    async def _controller_duty(self, read: ClusterItems | None = None) -> None:
        """One pass of the controller role, run on every cluster read (`_read_cluster`, every
        `controller_check_interval_s`), with the lease item and metadata version it read; without
        one (at start-up) the pass reads the lease itself.

        The lease holder renews the lease once per heartbeat interval, in a task of its own
        (`_renew_controller_lease`) so that a long pass (a snapshot of many partitions on a slow
        store) cannot let the lease lapse, and checks broker liveness on every pass, so a broker is fenced (and its partitions get new leaders) within one check
        interval of its session running out, not one heartbeat interval. The other brokers read
        the lease and observe heartbeats on every pass, so one takes over within a check interval
        of the lease lapsing. In DynamoDB terms: the pass's read is one BatchGetItem per broker
        (`_read_cluster`), and the holder writes the lease once per heartbeat interval.
        """
        loop = asyncio.get_running_loop()
        if self.controller is not None and self.lease.controller_epoch is not None:
            epoch = self.lease.controller_epoch  # renewed by `_renew_controller_lease`
        elif read is not None and read.lease_read:
            # The lease as read then, timed as read then (the lease runs out on this process's clock).
            # While another broker's lease runs, deciding so needs no call: no worker thread.
            if self.lease.controller_epoch is None and not self.lease.lapsed(read.lease, read.at_ms):
                epoch = None
            else:
                epoch = await asyncio.to_thread(self.lease.try_acquire, self.config.broker_id, read.at_ms, read.lease)
        else:
            epoch = await asyncio.to_thread(self.lease.try_acquire, self.config.broker_id)
        if epoch is None:
            self.controller = None
            # Watch heartbeats while another broker holds the lease, so that on taking over this
            # broker can fence one that died with the old controller at once. From the pass's read
            # that is a few comparisons, done here; at start-up it reads the brokers table.
            if read is not None:
                self.heartbeat_observer.observe(None, read.brokers)
            else:
                await asyncio.to_thread(self.heartbeat_observer.observe)
            return
        if self.controller is None or self.controller.controller_epoch != epoch:
            log.info("broker %d is the controller at epoch %d", self.config.broker_id, epoch)
            # Clients address admin requests to the controller named in Metadata: every broker learns
            # the new holder from the change sequence. The term begins once that is written (a failed
            # write is tried again on the next pass).
            await asyncio.to_thread(self.store.announce_controller, self.config.broker_id, epoch)
            self.metrics.controller_terms.inc()
            # As Kafka's controller: the first imbalance check comes one interval into the term.
            self._leader_rebalance_due = loop.time() + self.config.get_int("leader.imbalance.check.interval.seconds")
            self.heartbeat_observer.begin_term(epoch, self.image.to_snapshot() if self.image.version >= 0 else None)
            self.controller = self.heartbeat_observer
        # A pass from a read at the version this controller last planned from, with no broker stalled,
        # reads and writes nothing: it is decided here, without `_controller_pass`'s two worker-thread
        # hops (in the sixth pass's profile, most of an idle controller's own CPU outside botocore).
        if not (read is not None and self.reassignments.planned_at(read.version)
                and self.controller.quiet_pass(read.version, read.brokers)):
            await self._controller_pass(self.controller, epoch, read)
        if self.config.get_bool("auto.leader.rebalance.enable") and loop.time() >= self._leader_rebalance_due:
            self._leader_rebalance_due = loop.time() + self.config.get_int("leader.imbalance.check.interval.seconds")
            started = time.perf_counter()
            moved = await asyncio.to_thread(self.controller.rebalance_leaders,
                                            self.config.get_int("leader.imbalance.per.broker.percentage"))
            self.metrics.elections_done({"preferred_rebalance": self.image.leader_changes(moved)},
                                        time.perf_counter() - started)
            if moved:
                log.info("leader rebalance moved %d leaderships back to preferred replicas", len(moved))

    async def _controller_pass(self, controller: Controller, epoch: int, read: ClusterItems | None) -> None:
        """The controller pass proper: fence stalled brokers, elect leaders, complete reassignments."""
        started = time.perf_counter()
        # The version and heartbeats read this pass stand for the election check's own reads (`Controller.run_once`).
        result = await asyncio.to_thread(controller.run_once, None, read.version if read is not None else None,
                                         read.brokers if read is not None else None)
        self._count_elections(result.changed_partitions, result.shutdown_moves, started)
        started = time.perf_counter()
        completed = await asyncio.to_thread(self.reassignments.complete_ready, epoch, controller.current_snapshot,
                                            controller.unchanged_version)
        self.metrics.elections_done({"reassignment": self.image.leader_changes(completed)},
                                    time.perf_counter() - started)
        for state in completed:
            log.info("reassignment of %s-%d completed: replicas %s, leader %d", state.topic, state.partition,
                     list(state.replicas), state.leader)

    def _count_elections(self, changed: Sequence[PartitionState], shutdown_moves: Sequence[PartitionState],
                         started: float) -> None:
        """Count the partitions of a controller pass whose leader changed (against this broker's image),
        those moved off a SHUTTING_DOWN broker as ``controlled_shutdown``, the rest as ``broker_change``,
        and time the pass if any did."""
        moved = {(state.topic, state.partition) for state in shutdown_moves}
        self.metrics.elections_done({
            "broker_change": self.image.leader_changes(s for s in changed if (s.topic, s.partition) not in moved),
            "controlled_shutdown": self.image.leader_changes(shutdown_moves)}, time.perf_counter() - started)

    def _renew_controller_lease(self) -> None:
        """Bump the lease's heartbeat while this broker holds it (every heartbeat interval, in the
        lease thread); on losing it, the event loop drops the controller role of that term."""
        controller, epoch = self.controller, self.lease.controller_epoch
        if controller is None or epoch is None:
            return
        try:
            self.lease.heartbeat()
        except FencedControllerError as exc:
            log.warning("broker %d lost the controller lease: %s", self.config.broker_id, exc)
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._drop_controller_role, controller)

    def _drop_controller_role(self, controller: Controller) -> None:
        if self.controller is controller and self.lease.controller_epoch is None:
            self.controller = None

    async def _checkpoint_high_watermarks(self) -> None:
        # Each checkpoint is a small file write (no fsync: see write_high_watermark_checkpoint); for
        # hundreds of partitions that is still more than the event loop should take (a py-spy profile
        # of a failover at 1,000 partitions found a survivor spending a third of its time here, when
        # each had two fsyncs), so the writes go to a worker thread.
        due = [(partition, checkpoint) for partition in list(self.replicas.partitions.values())
               if (checkpoint := partition.high_watermark_checkpoint_due()) is not None]
        if not due:
            return
        await asyncio.to_thread(_write_checkpoints, [checkpoint for _, checkpoint in due])
        for partition, (_, high_watermark) in due:
            partition.high_watermark_checkpointed(high_watermark)

    async def _delete_logs(self) -> None:
        """Remove the ``-delete`` directories of logs that left this broker, once file.delete.delay.ms passed."""
        for directory in self.replicas.deletions.due():
            await asyncio.to_thread(remove_directory, directory)
            log.info("removed %s", directory)

    async def _enforce_retention(self) -> None:
        for partition in list(self.replicas.partitions.values()):
            topic = self.image.topics.get(partition.topic)
            if topic is None or effective(topic.configs, self.config, "remote.storage.enable") == "true":
                # The tiering service owns retention of tiered topics: a local segment may go only
                # once the manifest says it is in S3.
                continue
            partition.log.enforce_retention(high_watermark=partition.high_watermark)


def _write_checkpoints(checkpoints: list[tuple[Path, int]]) -> None:
    for path, high_watermark in checkpoints:
        try:
            write_high_watermark_checkpoint(path, high_watermark)
        except FileNotFoundError:
            continue  # the replica was removed (its topic deleted) since the checkpoint was due


class _PeriodicThread:
    """Runs ``duty`` every ``interval_s`` (start to start) in a daemon thread of its own until stopped.

    For the broker's liveness duties, its heartbeat and the controller lease renewal: on the event
    loop (or in its shared worker pool) they waited behind whatever else the broker did, and at
    1,000 partitions under load (97-partition transactions, snapshots, opening replicas, serving
    fetches for all of them) that was seconds, long enough for a live broker to be fenced or to
    lose the lease. As Kafka's broker heartbeats from its own thread, so does this one: liveness
    means the process runs and reaches DynamoDB. Errors are logged and the duty runs again next time.
    """

    def __init__(self, name: str, interval_s: float, duty: Callable[[], None]) -> None:
        self._interval_s = interval_s
        self._duty = duty
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            started = time.monotonic()
            try:
                self._duty()
            except MetadataError as exc:
                log.warning("%s: %s", self._thread.name, exc)
            except Exception:
                log.exception("%s failed", self._thread.name)
            self._stopped.wait(max(0.0, self._interval_s - (time.monotonic() - started)))

    async def stop(self) -> None:
        """Stop after the duty under way, if any, and wait for the thread to end."""
        self._stopped.set()
        if self._thread.is_alive():
            await asyncio.to_thread(self._thread.join)
