"""API tokens: exchange a username and password for a token, or revoke your own.

``POST /api/auth/token/`` with ``username`` and ``password`` returns ``{"token": ...}`` (the
same token on every call until it is revoked); send it as ``Authorization: Token <token>``.
``DELETE /api/auth/token/`` with that header revokes it.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.authtoken.models import Token
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.permissions import AllowAny, BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import AnonRateThrottle
from rest_framework.views import APIView

from controlplane.api.parsers import StrictJSONParser


class PasswordGuessThrottle(AnonRateThrottle):
    """Slows password guessing: token requests per client address."""

    scope = "auth-token"
    rate = "20/min"


class AuthTokenView(APIView):
    parser_classes = [StrictJSONParser, FormParser, MultiPartParser]
    serializer_class = AuthTokenSerializer

    def get_permissions(self) -> list[BasePermission]:
        if self.request.method == "POST":
            return [AllowAny()]
        return [IsAuthenticated()]

    def get_throttles(self) -> list[Any]:
        if self.request.method == "POST":
            return [PasswordGuessThrottle()]
        return []

    @extend_schema(
        summary="Get an API token",
        request=AuthTokenSerializer,
        responses={
            200: inline_serializer("AuthTokenResponse", fields={"token": serializers.CharField()})
        },
        auth=[],
    )
    def post(self, request: Request) -> Response:
        serializer = AuthTokenSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        token, _ = Token.objects.get_or_create(user=serializer.validated_data["user"])
        return Response({"token": token.key})

    @extend_schema(summary="Revoke your API token", request=None, responses={204: None})
    def delete(self, request: Request) -> Response:
        # IsAuthenticated lets only a signed-in user this far: the check narrows the type.
        if isinstance(request.user, User):
            Token.objects.filter(user=request.user).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)
