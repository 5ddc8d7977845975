"""Whether each cloud is served and, when not, what is missing (start-up lines, `config check`).

Each asks its cloud's own credential chain, as its builder does: botocore's (whose last links ask
the container and instance metadata services: set AWS_EC2_METADATA_DISABLED=true off AWS),
google-auth's Application Default Credentials, and for Azure the settings alone (Entra ID tokens are
asked for on the first request).
"""

from __future__ import annotations

from app.providers.config import ProviderConfig

__all__ = ["azure_status", "bedrock_status", "vertex_status"]


def bedrock_status(config: ProviderConfig) -> tuple[bool, str]:
    region = config.secret("aws_region")
    if region is None:
        return False, "AWS_REGION is not set"
    from app.providers.cloud_auth import AwsSigner

    signer = AwsSigner.from_chain(region, profile=config.secret("aws_profile"))
    if signer is None or signer.credentials is None:
        return False, ("botocore's credential chain found no AWS credentials (AWS_ACCESS_KEY_ID and "
                       "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, web identity, container or instance role)")
    return True, f"region {region}, credentials: {signer.credentials.method}"


def vertex_status(config: ProviderConfig) -> tuple[bool, str]:
    project = config.secret("google_cloud_project")
    if project is None:  # asked first: without it ADC is not asked (it probes the metadata server)
        return False, "GOOGLE_CLOUD_PROJECT is not set"
    from app.providers.cloud_auth import GoogleBearer

    found = GoogleBearer.from_adc()
    if found is None:
        return False, ("no Google Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, workload "
                       "identity, the metadata server)")
    return True, f"project {project}, location {config.secret('google_cloud_location') or 'global'}"


def azure_status(config: ProviderConfig) -> tuple[bool, str]:
    if config.secret("azure_openai_endpoint") is None:
        return False, "AZURE_OPENAI_ENDPOINT is not set"
    if config.secret("azure_openai_api_key"):
        return True, "AZURE_OPENAI_ENDPOINT and AZURE_OPENAI_API_KEY set"
    return True, "AZURE_OPENAI_ENDPOINT set, Microsoft Entra ID through azure-identity (no AZURE_OPENAI_API_KEY)"
