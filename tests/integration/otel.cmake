# OpenTelemetry traces (src/otel/, docs/design.md "Tracing"): otel_traces
# runs an OTLP/HTTP JSON receiver, the official TypeScript SDK client inside
# an OpenTelemetry JS SDK span through tidemark-gateway to a child
# tidemark-server --stdio (one trace, parent links), tidemark-client's own
# CLIENT span heading a trace, the HTTP traceparent header, sampling off
# (nothing exported) and an unreachable collector (calls unaffected, spans
# counted dropped).
if(NODE_EXECUTABLE)
  add_test(NAME otel_traces
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/otel_traces.mjs
            $<TARGET_FILE:tidemark-gateway> $<TARGET_FILE:tidemark-server> $<TARGET_FILE:tidemark-client>
            $<TARGET_FILE:tidemark-everything>)
  set_tests_properties(otel_traces PROPERTIES TIMEOUT 180 LABELS otel
                       ENVIRONMENT "TIDEMARK_PEERS_DIR=${TIDEMARK_PEERS}")
endif()
# grafana_metrics: every metric a query of examples/grafana-dashboard.json
# names is exported by a live tidemark-server, and the MCP duration and
# durability histograms have samples once it did what they measure.
if(NODE_EXECUTABLE)
  add_test(NAME grafana_metrics
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/grafana_metrics.mjs
            $<TARGET_FILE:tidemark-server> ${CMAKE_SOURCE_DIR}/examples/grafana-dashboard.json)
  set_tests_properties(grafana_metrics PROPERTIES TIMEOUT 60 LABELS otel)
endif()
