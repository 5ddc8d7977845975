"""The descriptors of the clouds: `bedrock`, `vertex`, `azure` and `azure-responses`
(app/providers/descriptor.py). Their credentials come from each cloud's own chain (botocore,
google-auth ADC, azure-identity), so each says by `status` whether it is served and why not."""

from __future__ import annotations

from app.providers.descriptor import ProviderDescriptor, SettingSpec, lazy

__all__ = ["AZURE", "AZURE_RESPONSES", "BEDROCK", "VERTEX"]

BEDROCK = ProviderDescriptor(
    name="bedrock",
    summary="AWS Bedrock `ConverseStream` (Claude also by `InvokeModelWithResponseStream` for the Messages facade)",
    build=lazy("app.providers.bedrock:build_bedrock"),
    settings=(
        SettingSpec(field="aws_region", env=("AWS_REGION", "AWS_DEFAULT_REGION"), kind="text",
                    description="The AWS region of Bedrock (serves `bedrock/*` with credentials from botocore's chain: "
                                "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, web identity, container or "
                                "instance role)."),
        SettingSpec(field="aws_profile", env=("AWS_PROFILE",), kind="text",
                    description="The AWS shared-config profile botocore reads credentials from."),
        SettingSpec(field="bedrock_endpoint_url", env=("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "AWS_ENDPOINT_URL"),
                    kind="url", description="The bedrock-runtime endpoint (default "
                                            "https://bedrock-runtime.{region}.amazonaws.com)."),
    ),
    credentials=("aws_region",),
    base_url_setting="bedrock_endpoint_url",
    options=("inferenceConfig", "additionalModelRequestFields", "guardrailConfig", "performanceConfig",
             "requestMetadata", "additionalModelResponseFieldPaths"),
    price_keys=("bedrock/*",),
    fixtures="bedrock",
    framing=lazy("app.providers.eventstream:EventStreamDecoder.bounded"),
    normalizer=lazy("app.providers.bedrock_stream:normalizer"),
    error_answer=lazy("app.providers.bedrock:error_answer"),
    status=lazy("app.providers.cloud_status:bedrock_status"),
)

VERTEX = ProviderDescriptor(
    name="vertex",
    summary="Google Vertex AI: Gemini (`streamGenerateContent`) and Claude (`streamRawPredict`)",
    build=lazy("app.providers.vertex:build_vertex"),
    settings=(
        SettingSpec(field="google_cloud_project", env=("GOOGLE_CLOUD_PROJECT",), kind="text",
                    description="The Vertex AI project: serves `vertex/*` with Application Default Credentials "
                                "(GOOGLE_APPLICATION_CREDENTIALS, workload identity; unset: not served)."),
        SettingSpec(field="google_cloud_location", env=("GOOGLE_CLOUD_LOCATION",), kind="text",
                    description="The Vertex AI location: a region (`us-east5`) or `global` (the default)."),
        SettingSpec(field="vertex_base_url", env=("VERTEX_BASE_URL",), kind="url",
                    description="Replaces the Vertex AI host (default https://{location}-aiplatform.googleapis.com, "
                                "https://aiplatform.googleapis.com for `global`)."),
    ),
    credentials=("google_cloud_project",),
    base_url_setting="vertex_base_url",
    options=("generationConfig", "safetySettings", "thinking", "metadata"),
    price_keys=("vertex/*",),
    fixtures="gemini",
    framing=lazy("app.providers.sse:SSEDecoder.bounded"),
    normalizer=lazy("app.providers.gemini_stream:normalizer"),
    error_answer=lazy("app.providers.gemini:error_answer"),
    status=lazy("app.providers.cloud_status:vertex_status"),
)

AZURE_SETTINGS = (
    SettingSpec(field="azure_openai_endpoint", env=("AZURE_OPENAI_ENDPOINT",), kind="url",
                description="The Azure OpenAI resource (https://{resource}.openai.azure.com): serves `azure/*` and "
                            "`azure-responses/*` (deployment names)."),
    SettingSpec(field="azure_openai_api_key", env=("AZURE_OPENAI_API_KEY",),
                description="The resource's key (`api-key` header); unset: Microsoft Entra ID through azure-identity."),
    SettingSpec(field="openai_api_version", env=("OPENAI_API_VERSION",), kind="text",
                description="The API version of the deployment paths (`2024-10-21`); unset: the v1 API paths."),
)

AZURE = ProviderDescriptor(
    name="azure",
    summary="Azure OpenAI Chat Completions (deployments)",
    build=lazy("app.providers.azure:build_azure"),
    settings=AZURE_SETTINGS,
    credentials=("azure_openai_endpoint",),
    base_url_setting="azure_openai_endpoint",
    options=("top_p", "stop", "seed", "presence_penalty", "frequency_penalty", "logit_bias", "response_format",
             "parallel_tool_calls", "reasoning_effort", "max_completion_tokens", "user", "data_sources"),
    price_keys=("azure/*",),
    wire="openai-chat",
    fixtures="azure",
    framing=lazy("app.providers.sse:SSEDecoder.bounded"),
    normalizer=lazy("app.providers.openai_chat_stream:normalizer"),
    error_answer=lazy("app.providers.azure:error_answer"),
    status=lazy("app.providers.cloud_status:azure_status"),
)

AZURE_RESPONSES = ProviderDescriptor(
    name="azure-responses",
    summary="Azure OpenAI Responses API (the same resource as `azure`)",
    build=lazy("app.providers.azure:build_azure_responses"),
    settings=AZURE_SETTINGS,
    credentials=("azure_openai_endpoint",),
    base_url_setting="azure_openai_endpoint",
    options=("reasoning_effort", "reasoning_summary", "top_p", "max_output_tokens", "truncation",
             "parallel_tool_calls", "user", "text", "store", "include", "metadata"),
    price_keys=("azure-responses/*",),
    wire="openai-responses",
    fixtures="openai-responses",
    framing=lazy("app.providers.sse:SSEDecoder.bounded"),
    normalizer=lazy("app.providers.openai_responses_stream:normalizer"),
    error_answer=lazy("app.providers.azure:error_answer"),
    status=lazy("app.providers.cloud_status:azure_status"),
)
