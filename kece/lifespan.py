import logging

from django.conf import settings

logger = logging.getLogger("kece.lifespan")


async def serve_lifespan(receive, send):
    scheduler = None
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                from kece.startup import check_single_process_sqlite

                check_single_process_sqlite()
                # Subscribe to node changes before the first node is authenticated, so that
                # the subscription's start does not drop identities cached meanwhile.
                from judging.waiting import registry

                registry().keep_listening()
                from kece.health import drain_on_sigterm

                drain_on_sigterm()
                # Before the scheduler's thread starts: what its first steps hold is not loading's.
                from kece.startup import freeze_loaded_objects, prepare_metrics

                prepare_metrics()
                freeze_loaded_objects()
                if settings.KECE_IN_PROCESS_SCHEDULER:
                    from kece.scheduler import InProcessScheduler

                    scheduler = InProcessScheduler()
                    scheduler.start()
            except Exception as exc:
                logger.exception("startup failed")
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                return
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if scheduler is not None:
                scheduler.stop()
            from kece import metrics

            metrics.mark_process_dead()
            await send({"type": "lifespan.shutdown.complete"})
            return
